"""The README's Python examples run as written."""

from __future__ import annotations

import pathlib
import re

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_readme_has_examples():
    assert python_blocks()


def test_readme_examples_run(capsys):
    for block in python_blocks():
        exec(compile(block, str(README), "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "PUT_OK 0" in out
    assert "0 paid b'{\"id\": 17}'" in out
    assert "['order-17']" in out

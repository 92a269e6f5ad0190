"""plain_acl.yml changed as RocketMQ's PlainPermissionManager changes it: accounts created,
updated field by field, deleted; the white list replaced; the version counted; nothing
written that the broker could not load."""

from __future__ import annotations

import pytest
import yaml

from rocketq.acl.edit import (
    AclUpdateError,
    data_version,
    read_acl_data,
    with_account,
    with_global_white,
    without_account,
    write_acl_data,
)

FILE = {"accounts": [{"accessKey": "rocketq-admin", "secretKey": "admin-secret-1",
                      "admin": True}]}


def test_an_update_changes_the_fields_given_and_keeps_the_rest():
    data = with_account(FILE, {"accessKey": "app-user-1", "secretKey": "app-secret-1",
                               "topicPerms": ["Orders=PUB"], "defaultGroupPerm": "SUB"})
    data = with_account(data, {"accessKey": "app-user-1", "topicPerms": ["Orders=SUB"],
                               "whiteRemoteAddress": "10.0.0.*", "secretKey": None})
    assert data["accounts"][1] == {"accessKey": "app-user-1", "secretKey": "app-secret-1",
                                   "topicPerms": ["Orders=SUB"], "defaultGroupPerm": "SUB",
                                   "whiteRemoteAddress": "10.0.0.*"}
    assert FILE["accounts"][0] == {"accessKey": "rocketq-admin", "secretKey": "admin-secret-1",
                                   "admin": True}  # the input is left as it was
    with pytest.raises(AclUpdateError, match="needs its secretKey"):
        with_account(FILE, {"accessKey": "brand-new-1"})
    with pytest.raises(AclUpdateError, match="Parse resource permission failed"):
        with_account(FILE, {"accessKey": "rocketq-admin", "groupPerms": ["g=ALL"]})
    with pytest.raises(AclUpdateError, match="defaultTopicPerm"):
        with_account(FILE, {"accessKey": "rocketq-admin", "defaultTopicPerm": "ANY"})
    assert without_account(data, "app-user-1")["accounts"] == FILE["accounts"]
    with pytest.raises(AclUpdateError, match="not in the ACL file"):
        without_account(FILE, "app-user-1")


def test_written_whole_with_its_version_and_only_when_loadable(tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text("# comments do not survive a rewrite\n" + yaml.safe_dump(FILE))
    path.chmod(0o640)
    write_acl_data(str(path), with_global_white(read_acl_data(str(path)), ["10.1.*.*"]))
    data = read_acl_data(str(path))
    assert data["globalWhiteRemoteAddresses"] == ["10.1.*.*"]
    assert data_version(data)["counter"] == 1 and data_version(data)["timestamp"] > 0
    assert path.stat().st_mode & 0o777 == 0o640
    before = path.read_text()
    short = with_account(data, {"accessKey": "tiny", "secretKey": "secret-long-1"})
    with pytest.raises(AclUpdateError, match="accessKey 'tiny'"):
        write_acl_data(str(path), short)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["plain_acl.yml"]  # no temporary left

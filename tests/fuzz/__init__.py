"""Coverage-guided fuzzing (atheris) of every decoder that reads bytes from the network or
from disk: ``targets`` holds one function per decoder, ``run`` runs one under atheris,
``seeds`` rebuilds the checked-in seed corpora under ``corpus/``."""

"""The version of rocketq, in a module of its own at the bottom of the stack, so that the
parts that report it (a client's running info, the broker's runtime info, the command line)
take it from here and never import the package root, which sits at the top."""

__version__ = "0.1.0"

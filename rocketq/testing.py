"""A real NameServer + Broker for users' own tests (a pytest plugin)."""

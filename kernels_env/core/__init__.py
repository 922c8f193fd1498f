"""The types every stage shares: EnvConfig, Status, Result and the parsed/compiled program."""

"""One backend class per database: the only modules that know which database they talk to."""

"""The run record: typed sections that save to and load from record.json."""

"""A job's files and rows, read and written alike by the client and the workers. Nothing is imported here; import the
modules."""

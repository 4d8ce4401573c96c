"""`UserError`: input the user must fix: a config value, a path, a file, a name.

The command line prints its message as one `error:` line with no traceback, and so does the
trainer for one raised in a worker process. Every other exception is a bug in Tempering (or
in a library it calls) and shows its traceback. It subclasses ValueError so that library
callers who catch bad input as ValueError keep doing so.
"""


class UserError(ValueError):
    """Bad input, described completely by the message (which names the file, key or value)."""

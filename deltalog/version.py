"""deltalog's version, in a module of its own so that the log can stamp it on what it creates without
importing the package's public face (``deltalog/__init__.py`` imports the log)."""

__version__ = "0.1.0"

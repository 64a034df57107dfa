"""The built-in capabilities, one package each (see each package's docstring)."""

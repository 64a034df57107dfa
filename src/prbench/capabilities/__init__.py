"""The built-in run kinds, one package each in the shape of a plug-in (settings, driver, kind, stage, command, report)."""

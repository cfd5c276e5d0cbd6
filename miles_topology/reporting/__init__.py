"""Reporting verdicts: the output sink (safetext), one module per output format (formats/)
and the text and SVG maps (show)."""

"""sparkrack: operate a rack of eight DGX Spark (GB10) nodes serving one TP8 model."""

__version__ = "0.1.0"

"""Every option string an engine's command line accepts, read from its wheel or, inside its
image, from the installed package: the one extractor of the option tables.

Stdlib only, Python 3.9 or later, and its modules import each other relatively, so it runs
inside any image under any name (docs/engines.md#how-the-options-are-read; the table's
format: docs/formats.md#option-tables).
"""

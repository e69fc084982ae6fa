"""Rehearse your own rack: its shape captured in one file (`invoke facts.capture`), what
changed since a capture (`--diff`), and a rehearsal rack built as its twin.

- capture.py: the capture over the fleet, its file (versioned YAML) written and read;
- diff.py: two captures compared, one line a change (pure).
"""

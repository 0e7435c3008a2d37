"""The tools and what a user reads and installs: the bench, stress and fault-matrix slices, the
demo's pure pieces, the README's and the guides' code blocks, the wheel, the pytest plugin's
entry point (``plugin_entry.py``) and the synth cache."""

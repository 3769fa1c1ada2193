"""A bounded soak of the app under gunicorn: writers and readers at once, invariants per walk.

Run it with ``python -m soak.run [--seconds N]``; see soak/run.py.
"""

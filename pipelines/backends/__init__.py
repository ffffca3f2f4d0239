"""Model engines: one module per engine, plain Python, no Django.

Each engine object is loaded once per process and shared by many pipeline
units, possibly from several threads at once; per-session state (VAD context,
generation caches) lives in objects the engine hands out, never on the engine.
Modules import their heavy dependencies lazily, so importing this package is cheap.
"""

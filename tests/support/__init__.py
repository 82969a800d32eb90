"""What the tests share: the fixture files and the models built from them, compute-input defaults, header writers.

Not a test module: tests import from here, never from each other.
"""

"""Shared by the bench scripts (interleaved, profile, hot-functions): bench/startup loaded as a
module, for its bundles, floor, crun wrapper, work dirs and clean-up."""

import importlib.machinery
import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def load_startup():
    """bench/startup (a script without .py) as the module `startup`."""
    loader = importlib.machinery.SourceFileLoader("startup", os.path.join(HERE, "startup"))
    spec = importlib.util.spec_from_loader("startup", loader)
    m = importlib.util.module_from_spec(spec)
    loader.exec_module(m)
    return m

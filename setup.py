"""Build hook for the cffi extension; all metadata lives in pyproject.toml."""

from setuptools import setup

setup(cffi_modules=["ffi/build.py:ffi"])

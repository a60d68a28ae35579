"""Build hook for the cffi extension; all metadata lives in pyproject.toml."""

from setuptools import setup

setup(cffi_modules=["futoin_anyio/binary/_build_ffi.py:ffi"])

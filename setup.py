"""Build hook for the native media core: cffi compiles native/src/*.c at install time."""

from setuptools import setup

setup(cffi_modules=["native/build_native.py:ffibuilder"])

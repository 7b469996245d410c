"""Build hook for the C extension; all metadata lives in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "mooncake_core._native",
            sources=["native/mc_native.c"],
            extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wextra", "-fvisibility=hidden"],
            libraries=["pthread"],
        ),
        Extension(
            "mooncake_core._flat",
            sources=["native/mc_flat.c"],
            extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wextra", "-fvisibility=hidden"],
        ),
    ],
)

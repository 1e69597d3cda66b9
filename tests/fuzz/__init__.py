"""Fuzz targets (atheris) for the metadata parsers, and the inputs the property tests share with them."""

"""Your data: ``VerticalDataset`` builders (arrays, CSV/Parquet tables, image folders, text CSVs)
and the loaders of the seeds' sets from a folder (ModelNet40 views, Amazon Review Polarity).

``privzv.training.data`` registers them and re-exports the builders; it is imported first, so that
importing a module of this package alone finds the registry complete.
"""

from privzv.training import data as _data  # noqa: F401

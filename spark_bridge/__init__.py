"""PySpark bridge over the mirror log: the ``headrace`` data source, export and replay.

Needs the ``spark`` extra (pyspark, pyarrow); the broker never imports this package.
"""

"""What the user asks for: one module per command, and the Python API that runs the same calls.

In: parsed flags (:mod:`.flags`) or Python arguments (:mod:`.api`). Out: files written inside the
output folder, JSON, exit codes; every edge shared by the commands lives in :mod:`.io`, interrupts in
:mod:`.interrupts`, a Dask cluster in :mod:`.cluster`.
Tables, pages and charts come from :mod:`fleetplan.rendering`; the planning itself from the library.
"""

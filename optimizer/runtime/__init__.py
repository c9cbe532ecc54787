"""How a planning run is carried out: one wall-clock deadline, interrupts, worker processes.

Holds the command-wide deadline and the progress it reports (:mod:`.deadline`), the interrupts the
command line's signal handlers raise (:mod:`.signals`) and the worker pool for planning in parallel
(:mod:`.workers`). In: time limits, jobs. Out: deadlines, results of jobs run elsewhere.
Not a stage of the pipeline: it says how, never what, is planned; imports no stage of it.
"""

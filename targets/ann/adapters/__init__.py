"""Outside ANN libraries as ``ann`` implementations, judged as black boxes.

fuzzkit's own ann implementations follow the OctEx model exactly, so the target's oracle
(:mod:`fuzzkit.targets.ann.checks`) judges their cells, graph and visited sets.  A real library runs a
different algorithm: all that holds for *any* approximate index is result validity and recall
against exact kNN.  An adapter declares that contract by naming itself in its output record
(``outputs["black_box"]``, see :mod:`.judge`); the ann oracle then judges it by
:func:`.judge.oracle` and its structural properties skip it.

* :mod:`.faiss_impl` -- FAISS IVF-Flat and HNSW (``faiss-cpu``), ``faiss-ivf`` / ``faiss-hnsw``.
* :mod:`.faiss_mutants` -- planted bugs of the real FAISS usage, modelled on upstream issues.
"""

"""Components under test: one package per component, each declaring a fuzzkit Target."""

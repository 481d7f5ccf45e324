"""Memory for every model call in a mesh: contextfold as Envoy's external processor (`processor.py`)."""

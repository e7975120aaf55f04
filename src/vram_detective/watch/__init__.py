"""`watch URL`: a running engine's Prometheus metrics beside the prediction and a simulation of its traffic."""

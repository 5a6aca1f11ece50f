"""The integration-test Kubernetes control plane: build script, KWOK stages, Python harness."""

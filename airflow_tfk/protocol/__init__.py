"""The neutral protocol between the training runtime and the provider.

The runtime writes progress lines and reads TF Serving's model config; the provider reads
progress lines and writes the model config. Both depend on this package and on nothing
of each other, so it imports neither Airflow, TensorFlow, the Kubernetes client nor any
other ``airflow_tfk`` module.
"""

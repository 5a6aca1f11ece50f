"""A spec -> its Kubernetes manifests, pure: the Jinja2 sandbox, the pod templates, the
manifests of a cluster and their checks against Kubernetes' own schemas. Nothing is
imported here (the template engine loads only when something renders)."""

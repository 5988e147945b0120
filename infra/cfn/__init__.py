"""Generator of the SAM templates from infra/resources.json (infra/generate.py)."""

"""`scripts/deploy`: validate, build, package, lint, check the account, then deploy the three
stacks in order, reviewing each change set before it runs (docs/deploy.md)."""

"""What is indexed (event rules, active branch, linear writes) and how windows are reconciled."""

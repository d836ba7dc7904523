"""Dagster wiring for evalpack: Definitions, partitions, jobs, sensor, schedule, resources, executors."""

"""Rendering shared by the CLI and the UI: the Gantt charts of predicted and real schedules."""

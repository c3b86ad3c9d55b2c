"""A watermark controller's claim on a GPU pool, kept in the pool's description (``state``), and the
watchdog that runs inside the Airflow *scheduler* and fails a pool open once its claim lapses
(``watchdog``). The controller (``watermark/``) writes the claim; this package is what both sides
read, so the scheduler never imports the controller."""

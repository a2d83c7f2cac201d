"""zephyr.pipelines: text quality stages, ready-made batch pipelines and their configs."""

"""zephyr.pipelines: text quality batch ops, and ready-made batch pipelines (`zephyr run`: steps) with their configs."""

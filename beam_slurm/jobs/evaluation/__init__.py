"""One evaluation task: load a checkpoint, generate, grade, write metrics; resumable at every chunk."""

"""The Zhouyi doctor's stages: the board (host), the aipu driver's shared checks, libnoe, and
the models (npu)."""

from .chain import check_board, driver_steps, model_steps, user_space_steps

__all__ = ["check_board", "driver_steps", "model_steps", "user_space_steps"]

"""Predict: step time and the best layout from theory and the records (the formulas are
megalab.theory).

step_model    a step-time model with six constants
calibration   those constants fitted on the records, checked on records the fit never saw
search        every layout of a model on N GPUs that runs and fits, fastest first
"""

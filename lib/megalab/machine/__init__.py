"""The machine: what the GPUs promise (jobs.bench measures what they reach), and where a number was
measured.

hardware      datasheet numbers per GPU model
env           a fingerprint of the machine and the code, kept with every record
"""

"""Real libraries' adapter layers as ``scute`` implementations (one module per library).

Each module here runs another project's own code -- not a re-implementation of it -- on scute
cases, so that the scute oracle judges that library: :mod:`.peft_impl` runs Hugging Face PEFT's
wrapped ``torch.nn.Linear`` layers, one adapter at a time.
"""

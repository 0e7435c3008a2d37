"""What the constructs synthesize and refuse: templates (``assertions.Template``), validation
at synth, the example app, the Lambda assets. Synth only, no runtime; the synthesized example
and shapes stacks are the root conftest's ``example`` and ``shapes`` (other folders use them)."""

"""Why a function was traced or compiled again: abstract signatures of the arguments,
their diff against the closest earlier one, and the cause with its sentence.
Pure computation over what capture saw; imports only ``core``."""

"""Two runs side by side, function by function: did a change make training compile more?"""

"""Prompt formatting: the instruction each grader relies on, as chat messages and plain text.

A grader can only be as good as the format it asked for, so each instruction names the
exact form the grader extracts: a final ``\\boxed{}`` answer, one ```python block, or a
closing ``Answer: X`` line. The chat template itself is applied by the engine; the plain
prompt is for models that have none.
"""

from __future__ import annotations

from collections.abc import Sequence

Messages = list[dict[str, str]]

MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
CODE_SYSTEM = (
    "You are an expert Python programmer. You write correct, complete and efficient Python 3 code "
    "that passes all tests."
)
CHOICE_INSTRUCTION = (
    "Think step by step, then give your final answer as a single letter on the last line, "
    'in the form "Answer: X" where X is one of {letters}.'
)
LETTERS = "ABCDEFGHIJ"


def math_prompt(problem: str) -> tuple[Messages, str]:
    """Math: reason step by step, final answer in ``\\boxed{}`` (what the math grader extracts)."""
    user = f"{problem.strip()}\n\n{MATH_INSTRUCTION}"
    return [{"role": "user", "content": user}], f"Problem:\n{problem.strip()}\n\n{MATH_INSTRUCTION}\n\nSolution:"


def humaneval_prompt(prompt: str) -> tuple[Messages, str]:
    """HumanEval: show signature and docstring, ask for the whole completed function.

    The plain prompt is the bare signature and docstring, the classic completion format
    for base models: the grader then treats the completion as the function body.
    """
    user = (
        "Complete the following Python function. Return the complete function (with its signature and any "
        "imports or helper functions it needs) in a single ```python code block.\n\n"
        f"```python\n{prompt.rstrip()}\n```"
    )
    return [{"role": "system", "content": CODE_SYSTEM}, {"role": "user", "content": user}], prompt


def mbpp_prompt(text: str, tests: Sequence[str]) -> tuple[Messages, str]:
    """MBPP: the task text plus its first test, which fixes the function name and signature."""
    example = "\n".join(tests[:1])
    user = (
        f"{text.strip()}\nYour code should pass this test:\n\n{example}\n\n"
        "Write the complete Python function in a single ```python code block."
    )
    messages = [{"role": "system", "content": CODE_SYSTEM}, {"role": "user", "content": user}]
    return messages, f"{user}\n\n"


def livecodebench_prompt(question: str, starter_code: str) -> tuple[Messages, str]:
    """LiveCodeBench: the official-style instruction, stdin/stdout or a starter-code class."""
    user = f"### Question:\n{question.strip()}\n\n"
    if starter_code.strip():
        user += (
            "### Format: You will use the following starter code to write the solution to the problem "
            f"and enclose your code within delimiters.\n```python\n{starter_code.rstrip()}\n```\n\n"
        )
    else:
        user += (
            "### Format: Read the inputs from stdin, solve the problem and write the answer to stdout "
            "(do not directly test on the sample inputs). Enclose your code within delimiters as follows. "
            "Ensure that when the python program runs, it reads the inputs, runs the algorithm and writes "
            "output to STDOUT.\n```python\n# YOUR CODE HERE\n```\n\n"
        )
    user += "### Answer: (use the provided format with backticks)\n"
    messages = [{"role": "system", "content": CODE_SYSTEM}, {"role": "user", "content": user}]
    return messages, f"{user}\n"


def choice_prompt(question: str, choices: Sequence[str]) -> tuple[Messages, str]:
    """Multiple choice: lettered options, final line ``Answer: X`` (what the letter grader reads)."""
    letters = LETTERS[: len(choices)]
    options = "\n".join(f"({letter}) {str(choice).strip()}" for letter, choice in zip(letters, choices, strict=True))
    letter_list = ", ".join(letters[:-1]) + f" or {letters[-1]}" if len(letters) > 1 else letters
    instruction = CHOICE_INSTRUCTION.format(letters=letter_list)
    user = f"{question.strip()}\n\n{options}\n\n{instruction}"
    return [{"role": "user", "content": user}], f"Question:\n{user}\n\nSolution:"

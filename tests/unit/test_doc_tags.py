"""The image tags the docs' examples use exist in the registry after the docs' own push
commands (docker/push.sh, dry: the commands it would run)."""
import pathlib
import re
import shlex
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def pushed_tags(arguments: list[str]) -> set[str]:
    """The tags `./build.sh push ARGUMENTS` pushes to ECR."""
    done = subprocess.run([str(ROOT / "docker" / "push.sh"), "docker", "--dry-run", "--account", "123456789012",
                           "--region", "us-east-1", *arguments], capture_output=True, text=True, timeout=30, check=True)
    return set(re.findall(r"^docker push \S+:(\S+)$", done.stdout, re.M))


def used_and_pushed(text: str) -> tuple[set[str], set[str]]:
    """The tags the text's examples use, and those its push commands push."""
    used = set(re.findall(r"\.amazonaws\.com/sagemaker-tf-trainer:([\w.-]+)", text))
    commands = re.findall(r"^\./build\.sh push([^\n#]*)", text, re.M)
    pushed = set()
    for command in commands:
        arguments = [a for a in shlex.split(command) if a not in ("--dry-run",)]
        for flag in ("--account", "--region", "--registry", "--repository"):  # the registry's, not the tag's
            while flag in arguments:
                del arguments[arguments.index(flag):arguments.index(flag) + 2]
        if "--tag" not in arguments and "--insecure" not in arguments:
            pushed |= pushed_tags(arguments)
    return used, pushed


def test_every_tag_an_example_pulls_is_pushed_by_a_documented_push():
    used, pushed = used_and_pushed("\n".join(page.read_text() for page in PAGES))
    assert used and used <= pushed, f"tags the docs use but no documented push pushes: {sorted(used - pushed)}"


def test_the_readme_alone_gets_a_newcomer_every_image_its_examples_use():
    used, pushed = used_and_pushed((ROOT / "README.md").read_text())
    assert used and used <= pushed, f"tags README.md uses but none of its pushes pushes: {sorted(used - pushed)}"


def test_the_2_14_line_is_pushed_under_both_its_names():
    assert pushed_tags([]) == {"2.14-cpu", "cpu"} == pushed_tags(["--flavour", "2.14-cpu"])
    assert pushed_tags(["--flavour", "gpu"]) == {"2.14-gpu", "gpu"}
    assert pushed_tags(["--flavour", "2.21-cpu"]) == {"2.21-cpu"}
    assert pushed_tags(["--tag", "dev"]) == {"dev"}

#!/usr/bin/env bash
# Tag the built image and push it to ECR (or to any registry given with --registry).
#
#   docker/push.sh ENGINE [--dry-run] [--flavour cpu|gpu|2.14-cpu|2.14-gpu|2.21-cpu|2.21-gpu] [--account ID] [--region REGION]
#                         [--repository NAME] [--tag TAG] [--registry HOST[:PORT]] [--insecure]
#
# --flavour names the local image (localhost/sagemaker-tf-trainer:FLAVOUR) and, without --tag,
# the pushed tags: every tag of that image (the 2.14 line's: 2.14-cpu and its alias cpu, 2.14-gpu
# and gpu), so that either name the docs use exists in the registry. ECR: the account and region come from the AWS CLI (or --account/--region); the
# repository is created if missing; the engine logs in with `aws ecr get-login-password`.
# --registry skips all of that (a registry that needs no login, e.g. a local one);
# --insecure allows plain HTTP to it. --dry-run prints the commands instead of running them.
set -euo pipefail

ENGINE="${1:?engine}"
shift
DRY_RUN=0 FLAVOUR=cpu ACCOUNT="" REGION="" REPOSITORY="${IMAGE_NAME:-sagemaker-tf-trainer}" TAG="" REGISTRY="" INSECURE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY_RUN=1 ;;
    --flavour) FLAVOUR="$2"; shift ;;
    --account) ACCOUNT="$2"; shift ;;
    --region) REGION="$2"; shift ;;
    --repository) REPOSITORY="$2"; shift ;;
    --tag) TAG="$2"; shift ;;
    --registry) REGISTRY="$2"; shift ;;
    --insecure) INSECURE=1 ;;
    *) echo "push: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
SOURCE="localhost/${IMAGE_NAME:-sagemaker-tf-trainer}:$FLAVOUR"
if [ -n "$TAG" ]; then
  TAGS=("$TAG")
else
  case "$FLAVOUR" in
    cpu|2.14-cpu) TAGS=(2.14-cpu cpu) ;;
    gpu|2.14-gpu) TAGS=(2.14-gpu gpu) ;;
    *) TAGS=("$FLAVOUR") ;;
  esac
fi

run() {
  if [ "$DRY_RUN" -eq 1 ]; then
    printf '%s\n' "$*"
  else
    "$@"
  fi
}

if [ -z "$REGISTRY" ]; then
  if [ -z "$ACCOUNT" ]; then
    ACCOUNT="$(aws sts get-caller-identity --query Account --output text)" || {
      echo "push: no AWS account (configure the AWS CLI or pass --account)" >&2; exit 1; }
  fi
  if [ -z "$REGION" ]; then
    REGION="${AWS_REGION:-${AWS_DEFAULT_REGION:-$(aws configure get region 2>/dev/null || true)}}"
    [ -n "$REGION" ] || { echo "push: no AWS region (configure the AWS CLI or pass --region)" >&2; exit 1; }
  fi
  REGISTRY="$ACCOUNT.dkr.ecr.$REGION.amazonaws.com"
  if [ "$DRY_RUN" -eq 1 ]; then
    echo "aws ecr describe-repositories --repository-names $REPOSITORY --region $REGION || aws ecr create-repository --repository-name $REPOSITORY --region $REGION"
    echo "aws ecr get-login-password --region $REGION | $ENGINE login --username AWS --password-stdin $REGISTRY"
  else
    aws ecr describe-repositories --repository-names "$REPOSITORY" --region "$REGION" >/dev/null 2>&1 ||
      aws ecr create-repository --repository-name "$REPOSITORY" --region "$REGION" >/dev/null
    aws ecr get-login-password --region "$REGION" | "$ENGINE" login --username AWS --password-stdin "$REGISTRY"
  fi
fi

TLS=()
if [ "$INSECURE" -eq 1 ] && [ "$ENGINE" = podman ]; then
  TLS=(--tls-verify=false)
fi
for tag in "${TAGS[@]}"; do
  TARGET="$REGISTRY/$REPOSITORY:$tag"
  run "$ENGINE" tag "$SOURCE" "$TARGET"
  run "$ENGINE" push "${TLS[@]}" "$TARGET"
  [ "$DRY_RUN" -eq 1 ] || echo "pushed $TARGET"
done

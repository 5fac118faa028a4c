# shellcheck shell=bash
# Part of deploy/dev-cluster/dev-cluster (sourced by it; uses its variables and helpers).
#
# `selftest`: checks the running cluster is the Slurm it claims to be, without the connector:
# every data_parser version of API_VERSIONS answers an authenticated ping, the versions just
# outside that range answer 404, a job submitted through the newest version's job/submit (as
# `flyte`, with a token from `scontrol token`) runs and reaches accounting, and sbatch, squeue and
# sacct work in the chroot. Exit status 0 only when all of it holds.

# rest METHOD PATH [BODY]: prints the HTTP status on the first line, then the body. The token goes
# in on stdin (-H @-), never in curl's arguments.
selftest_rest() {
	local method="$1" path="$2" body="${3:-}" args=(-sS --max-time 20 -X "$1" -H @- -w '\n%{http_code}')
	[[ -n "$body" ]] && args+=(-H 'Content-Type: application/json' --data-binary "$body")
	local out
	out="$(printf 'X-SLURM-USER-TOKEN: %s\nX-SLURM-USER-NAME: %s\n' "$SELFTEST_TOKEN" "$JOB_USER" |
		curl "${args[@]}" "http://127.0.0.1:$RESTD_PORT$path")" || die "selftest: $method $path: curl failed"
	printf '%s\n%s\n' "${out##*$'\n'}" "${out%$'\n'*}"
}

selftest_ok() { log "selftest: ok: $*"; }

# v0.0.NN +/- 1
selftest_neighbour() {
	local v="$1" d="$2" n="${1##*.}"
	n=$((10#$n + d))
	printf '%s.%02d\n' "${v%.*}" "$n"
}

cmd_selftest() {
	require_up
	[[ "$RUN_ACCOUNTING" == 1 ]] && ACCOUNTING=1 || ACCOUNTING=0
	local out status body v
	out="$(in_root scontrol token username="$JOB_USER" lifespan=600)" || die "selftest: scontrol token failed"
	SELFTEST_TOKEN="${out#SLURM_JWT=}"

	local versions=() neighbours=()
	read -r -a versions <<<"$API_VERSIONS"
	for v in "${versions[@]}"; do
		out="$(selftest_rest GET "/slurm/$v/ping")"
		status="${out%%$'\n'*}" body="${out#*$'\n'}"
		[[ "$status" == 200 ]] || die "selftest: GET /slurm/$v/ping: HTTP $status (expected 200): $body"
		grep -Eq '"pinged": *"UP"|"responding": *true' <<<"$body" ||
			die "selftest: GET /slurm/$v/ping: slurmctld not reported up: $body"
		# slurmrestd writes "data_parser\/v0.0.NN" (JSON allows the escaped slash); accept both.
		grep -Eq "\"data_parser\": *\"data_parser(\\\\)?/$v\"" <<<"$body" ||
			die "selftest: GET /slurm/$v/ping: answered by another data_parser than $v: $body"
	done
	selftest_ok "ping answers 200 on ${versions[*]}"
	for v in "$(selftest_neighbour "${versions[0]}" -1)" "$(selftest_neighbour "${versions[-1]}" 1)"; do
		out="$(selftest_rest GET "/slurm/$v/ping")"
		status="${out%%$'\n'*}" body="${out#*$'\n'}"
		# slurmrestd's router answers an unknown path with plain text, not a JSON error (those are
		# answers from a known path); the text differs by release: 24.11 "Unable find requested
		# URL. ...", 26.05 "Unable to find requested URL endpoint. ...", 26.11 "Invalid or unknown
		# URL path" (tests/fixtures/slurmrestd/*_ping-unknown-version.json).
		[[ "$status" == 404 && -n "$body" && "${body:0:1}" != "{" ]] ||
			die "selftest: GET /slurm/$v/ping: HTTP $status '$body' (expected 404 with slurmrestd's plain-text 'unknown URL' answer: $v is not served)"
		neighbours+=("$v: '${body%%.*}'")
	done
	selftest_ok "ping answers 404 on the versions outside that range (${neighbours[*]})"

	local newest="${versions[-1]}" mark job_id
	mark="selftest-$$-$RANDOM"
	out="$(selftest_rest POST "/slurm/$newest/job/submit" \
		"{\"job\":{\"name\":\"$mark\",\"script\":\"#!/bin/bash\\necho $mark \$(id -un)\\n\",\"environment\":[\"PATH=/bin:/usr/bin\"],\"current_working_directory\":\"$SHARED_DIR/$JOB_USER\",\"standard_output\":\"$SHARED_DIR/$JOB_USER/$mark.out\"}}")"
	status="${out%%$'\n'*}" body="${out#*$'\n'}"
	job_id="$(grep -Eo '"job_id": *[0-9]+' <<<"$body" | head -n 1 | grep -Eo '[0-9]+$')" || true
	[[ "$status" == 200 && -n "$job_id" ]] ||
		die "selftest: POST /slurm/$newest/job/submit: HTTP $status, no job_id: $body"
	local i state=""
	for ((i = 0; i < 120; i++)); do
		state="$(in_root scontrol show job "$job_id" 2>/dev/null | grep -Eo 'JobState=[A-Z_]+' | cut -d= -f2)" || true
		[[ "$state" == COMPLETED || "$state" == FAILED || "$state" == CANCELLED || "$state" == TIMEOUT ]] && break
		sleep 0.5
	done
	[[ "$state" == COMPLETED ]] || die "selftest: REST job $job_id ended as '${state:-unknown}' (expected COMPLETED)"
	local want="$mark $JOB_USER" got
	got="$(cat "$ROOT$SHARED_DIR/$JOB_USER/$mark.out" 2>/dev/null)" || true
	[[ "$got" == "$want" ]] || die "selftest: REST job $job_id wrote '$got' (expected '$want')"
	rm -f "$ROOT$SHARED_DIR/$JOB_USER/$mark.out"
	selftest_ok "job $job_id submitted through $newest job/submit ran as $JOB_USER"

	# sbatch --wait returns when the job has ended, with its exit status.
	out="$(env -i PATH="$CHROOT_PATH" HOME=/tmp LANG=C.UTF-8 chroot --userspec="$JOB_USER:$JOB_USER" "$ROOT" \
		sbatch --wait --parsable --chdir "$SHARED_DIR/$JOB_USER" -o /dev/null --wrap 'true' 2>&1)" ||
		die "selftest: sbatch --wait failed: $out"
	local sbatch_id="${out%%;*}"
	[[ "$sbatch_id" =~ ^[0-9]+$ ]] || die "selftest: sbatch printed '$out', not a job id"
	in_root squeue -h -o %i >/dev/null || die "selftest: squeue failed"
	selftest_ok "sbatch (job $sbatch_id) and squeue"
	if [[ "$ACCOUNTING" == 1 ]]; then
		local id
		for id in "$job_id" "$sbatch_id"; do
			for ((i = 0; i < 60; i++)); do
				state="$(in_root sacct -n -X -P -j "$id" -o state 2>/dev/null | head -n 1)" || true
				[[ "$state" == COMPLETED ]] && break
				sleep 0.5
			done
			[[ "$state" == COMPLETED ]] || die "selftest: sacct shows job $id as '${state:-nothing}' (expected COMPLETED)"
		done
		selftest_ok "sacct has both jobs COMPLETED"
	fi
	log "selftest: passed ($RELEASE, $(in_root slurmctld -V), data_parsers ${versions[*]})"
}

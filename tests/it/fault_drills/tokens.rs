//! Short-lived minted tokens, renewed and refused mid-run.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_lived_minted_tokens_renewed_and_rejections_survived() {
    const TASKS: usize = 40;
    const LIFETIME: Duration = Duration::from_secs(2);
    const INJECTED: u32 = 6;
    let started = Instant::now();
    let mock =
        Arc::new(Mock::start("tokens", Duration::from_secs(600), FaultConfig::default()).await);
    // The connector mints its own tokens from the cluster's key, each living 2 s (renewed at 80%).
    let auth = AuthConfig::KeyFile {
        path: mock.key_file(),
        lifetime: LIFETIME,
    };
    let server = Server::start(deployment(
        mock.cluster(auth, Some("flyte")),
        Duration::from_millis(500),
    ))
    .await;
    let c = server.client().await;
    // Meanwhile slurmctld refuses a token as expired now and then (one at a time: the client
    // re-mints once per call, and a fresh token refused twice would be a real failure).
    let refuser = {
        let mock = mock.clone();
        tokio::spawn(async move {
            for _ in 0..INJECTED {
                tokio::time::sleep(Duration::from_millis(1500)).await;
                mock.handle.faults().set(FaultConfig {
                    reject_next_tokens: 1,
                    ..FaultConfig::default()
                });
                wait_for(
                    "an injected token rejection consumed",
                    Duration::from_secs(60),
                    || mock.handle.faults().get().reject_next_tokens == 0,
                    || format!("{} rejections so far", rejections(&mock)),
                )
                .await;
            }
        })
    };
    // Executions created through the run (one every 250 ms), each running 3 s.
    let mut create_errors = Vec::new();
    let mut metas = Vec::new();
    {
        let mut c = c.clone();
        for i in 0..TASKS {
            match create(&mut c, request(2000 + i as u32, "#!/bin/bash\nsleep 3\n")).await {
                Ok(m) => metas.push(m),
                Err(e) => create_errors.push(format!("CreateTask {i}: {e}")),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    let phases = Arc::new(std::sync::Mutex::new(Phases::default()));
    let (errors, lat, unreachable, _) = poll_to_the_end(
        &c,
        &metas,
        Phase::Succeeded,
        &phases,
        Duration::from_secs(60),
    )
    .await;
    refuser.await.unwrap();
    let wrong = std::mem::take(&mut phases.lock().unwrap().wrong);
    let rejected = rejections(&mock);
    println!(
        "DRILL tokens: {} tasks over {:.0}s with minted tokens living {}s (so ~{} renewals), \
         {INJECTED} tokens refused as expired mid-run, {rejected} rejections answered by the mock; \
         CreateTask errors {}, GetTask answers {} errors {} 'unreachable' {unreachable}, wrong \
         phases {}, all SUCCEEDED; drill took {:.1}s",
        metas.len(),
        started.elapsed().as_secs_f64(),
        LIFETIME.as_secs(),
        (started.elapsed().as_secs_f64() / (LIFETIME.as_secs_f64() * 0.8)) as u64,
        create_errors.len(),
        lat.len(),
        errors.len(),
        wrong.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(create_errors.is_empty(), "{create_errors:?}");
    assert!(errors.is_empty(), "{:?}", &errors[..errors.len().min(5)]);
    assert_eq!(
        unreachable, 0,
        "a refused token surfaced as an unreachable cluster"
    );
    assert!(wrong.is_empty(), "{wrong:?}");
    assert!(
        rejected >= u64::from(INJECTED),
        "the refusals did happen: {rejected}"
    );
    server.stop().await;
    Arc::into_inner(mock).unwrap().stop().await;
}

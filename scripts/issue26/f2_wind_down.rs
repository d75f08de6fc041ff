/// Finding 2: the run's main authority can wind a Treasurer run down (the first step of the
/// close path). The instruction is built from its name (Anchor's discriminator), so the file
/// compiles where it did not exist: there the program answers InstructionFallbackNotFound.
#[tokio::test]
async fn f2_a_treasurer_run_can_be_wound_down() {
    use anchor_lang::solana_program::instruction::{AccountMeta, Instruction};
    let mut env = Env::new().await;
    let run = env.new_run("p26-close", 78, 7).await;
    env.start_run(&run, 3000, 0).await;
    env.mint_to(&run.mint, &run.collateral, 50_000).await;
    let authority = run.authority.insecure_clone();
    env.fund(&authority.pubkey()).await;
    let ix = Instruction {
        program_id: psyche_treasurer::ID,
        accounts: vec![
            AccountMeta::new_readonly(authority.pubkey(), true),
            AccountMeta::new(run.address, false),
            AccountMeta::new_readonly(run.instance, false),
            AccountMeta::new(run.account, false),
            AccountMeta::new_readonly(psyche_coordinator::ID, false),
        ],
        // Anchor's discriminator: sha256("global:run_wind_down")[..8].
        data: vec![142, 123, 188, 33, 93, 38, 169, 248],
    };
    let r = env.send(ix, &[&authority]).await;
    assert!(r.is_ok(), "no way to wind the run down: {r:?}");
}

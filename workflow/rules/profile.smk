if all_profiles():

    rule profile:
        """Nsight Compute metrics of every GPU implementation at the profile shapes, in one ncu run (one
        start-up for the whole ladder): a tidy CSV per implementation, and one .ncu-rep for the GUI.
        Unavailable counters become a status; a stage whose build failed gets a row saying so."""
        input:
            unpack(profile_inputs),
        output:
            profiles=all_profiles(),
            status=f"{RESULTS}/status/profile.json",
        log:
            f"{RESULTS}/logs/profile.log",
        params:
            builds=profile_builds(),
            report=f"{RESULTS}/profile/ladder.ncu-rep",
        resources:
            gpu=1,
        conda:
            "../../env/conda.yaml"
        script:
            "../scripts/profile.py"

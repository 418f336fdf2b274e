"""Facts across the files of one project: a small summary per module, imports resolved inside
the project, and what each linted file sees of the modules it imports (`view.ProjectView`)."""
